{
  description = "lre: local remote execution (a REAPI server, cache, scheduler and worker for one machine)";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachDefaultSystem (system:
      let
        pkgs = nixpkgs.legacyPackages.${system};
        python = pkgs.python311;
        py = python.pkgs;

        # Runtime dependencies, the same list as [project.dependencies] in pyproject.toml.
        runtimeDeps = with py; [
          trio
          trio-util
          anyio
          grpcio
          protobuf
          googleapis-common-protos
          psutil
          rich
          typer
          json5
          zstandard
        ];

        lre = py.buildPythonApplication {
          pname = "lre";
          version = "0.1.0";
          pyproject = true;
          src = ./.;
          build-system = with py; [ setuptools wheel ];
          dependencies = runtimeDeps;
          # nixpkgs' versions may trail the lower bounds in pyproject.toml.
          pythonRelaxDeps = true;
          # The suite drives Bazel and real subprocesses; run it with `nix develop`.
          doCheck = false;
          pythonImportsCheck = [ "lre" "lre.proto" ];
          meta = {
            description = "Local remote execution for Bazel and Buck2";
            license = pkgs.lib.licenses.asl20;
            mainProgram = "lre";
          };
        };

        testTools = with py; [
          pytest
          pytest-trio
          hypothesis
          grpcio-tools
          mypy
          ruff
          import-linter
          types-protobuf
          prometheus-client
        ];
      in
      {
        packages.default = lre;
        packages.lre = lre;

        # `nix run` starts lre on the embedded default configuration.
        apps.default = {
          type = "app";
          program = "${pkgs.writeShellScript "lre-up" ''
            exec ${lre}/bin/lre up "$@"
          ''}";
        };

        devShell = self.devShells.${system}.default;
        devShells.default = pkgs.mkShell {
          packages = [
            (python.withPackages (_: runtimeDeps ++ testTools))
            pkgs.ruff
            pkgs.gcc
            pkgs.gnumake
            pkgs.tmux
            pkgs.bazel_7
          ];
          shellHook = ''
            export PYTHONPATH="$PWD''${PYTHONPATH:+:$PYTHONPATH}"
          '';
        };
      });
}
