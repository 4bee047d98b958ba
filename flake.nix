{
  description = "lre: local remote execution (a REAPI server, cache, scheduler and worker for one machine)";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      # lre runs on Linux only: it reads /proc and uses process groups,
      # prctl and cgroups for the actions it runs.
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forEachSystem = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      perSystem = pkgs:
        let
          python = pkgs.python3;
          py = python.pkgs;

          # nixpkgs has no trio-util; built here from its PyPI sdist.
          trio-util = py.buildPythonPackage rec {
            pname = "trio_util";
            version = "0.8.0";
            pyproject = true;
            src = pkgs.fetchPypi {
              inherit pname version;
              hash = "sha256-uVAwqZdqeo7Y9hwkyvvGguzd520byhuLQsdN8HStwW0=";
            };
            build-system = [ py.setuptools ];
            dependencies = [ py.trio py.async-generator ];
            # Its tests are not in the sdist.
            doCheck = false;
            pythonImportsCheck = [ "trio_util" ];
            meta.license = pkgs.lib.licenses.mit;
          };

          # Runtime dependencies: [project.dependencies] of pyproject.toml, one
          # for one (tests/test_flake.py checks the two lists agree).
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
            # nixpkgs may trail pyproject's lower bounds by a release; the
            # protobuf and grpcio minimums are the ones CI tests
            # (tests/proto/test_oldest_versions.py).
            pythonRelaxDeps = true;
            # The suite drives Bazel and real subprocesses; run it in `nix develop`.
            doCheck = false;
            pythonImportsCheck = [ "lre" "lre.proto" ];
            meta = {
              description = "Local remote execution for Bazel and Buck2";
              license = pkgs.lib.licenses.asl20;
              mainProgram = "lre";
              platforms = pkgs.lib.platforms.linux;
            };
          };

          testTools = with py; [
            pytest
            pytest-trio
            hypothesis
            grpcio-tools
            mypy
            types-protobuf
            types-psutil
            grpc-stubs
            prometheus-client
          ];
        in
        {
          inherit lre;
          shell = pkgs.mkShell {
            packages = [
              (python.withPackages (_: runtimeDeps ++ testTools))
              # Command-line tools, top-level packages in nixpkgs.
              pkgs.ruff
              pkgs.import-linter
              pkgs.gcc
              pkgs.gnumake
              pkgs.tmux
              pkgs.slirp4netns
              pkgs.time
              pkgs.bazel_7
            ];
            shellHook = ''
              export PYTHONPATH="$PWD''${PYTHONPATH:+:$PYTHONPATH}"
            '';
          };
        };
    in
    {
      packages = forEachSystem (pkgs: rec {
        lre = (perSystem pkgs).lre;
        default = lre;
      });

      # `nix run` starts lre on the embedded default configuration.
      apps = forEachSystem (pkgs: {
        default = {
          type = "app";
          # slirp4netns gives actions outside addresses from their own
          # network namespace, where lre's listeners are not (docs/security.md);
          # GNU time, pid 1 of each action, reports the memory of its
          # command's processes (docs/resource-control.md).
          program = "${pkgs.writeShellScript "lre-up" ''
            export PATH="${pkgs.slirp4netns}/bin:${pkgs.time}/bin:$PATH"
            exec ${(perSystem pkgs).lre}/bin/lre up "$@"
          ''}";
        };
      });

      devShells = forEachSystem (pkgs: {
        default = (perSystem pkgs).shell;
      });
    };
}
