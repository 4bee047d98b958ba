"""An execution platform for Buck2 that runs actions through lre.

`lre_platforms` returns one ExecutionPlatformInfo whose executor prefers
remote execution (lre on this machine) and falls back to local only for
actions that cannot run remotely. Point Buck2 at it with

    [build]
    execution_platforms = root//lre_platforms:lre

(`lre up` writes exactly this when the repository names no platform).

The platform carries the host's OS and CPU constraints (`os` and `cpu`, the
prelude's `config//os:linux`, `config//cpu:x86_64` and their kin, chosen in
BUCK from `host_info()`), so toolchains constrained to the host resolve as
they do on `prelude//platforms:default`.

It sends no remote execution properties of its own: an action's properties
are part of its key, so adding any would make every action miss a cache
filled without lre. lre runs an action that names none on its local worker
(cpu_count 1, OSFamily Linux assumed). Set `properties` only for what the
repository really needs (for example {"cpu_count": "4"} on a heavy target's
own platform); see toolchains/bazel/BUILD.bazel for the keys lre matches on.
"""

def _lre_platforms_impl(ctx):
    constraints = {}
    for dep in ctx.attrs.constraints:
        constraints.update(dep[ConfigurationInfo].constraints)
    platform = ExecutionPlatformInfo(
        label = ctx.label.raw_target(),
        configuration = ConfigurationInfo(constraints = constraints, values = {}),
        executor_config = CommandExecutorConfig(
            local_enabled = True,
            remote_enabled = True,
            # Run on the preferred executor only; racing local against remote
            # would do every action twice on the same laptop.
            use_limited_hybrid = True,
            remote_cache_enabled = True,
            remote_execution_properties = dict(ctx.attrs.properties),
            # Only sent in Meta-internal metadata; any string works.
            remote_execution_use_case = "lre",
            remote_output_paths = "output_paths",
        ),
    )
    return [
        DefaultInfo(),
        ExecutionPlatformRegistrationInfo(platforms = [platform]),
    ]

lre_platforms = rule(
    impl = _lre_platforms_impl,
    attrs = {
        # constraint_value targets (each provides ConfigurationInfo).
        "constraints": attrs.list(attrs.dep(providers = [ConfigurationInfo]), default = []),
        # Remote execution properties; none by default (see the docstring).
        "properties": attrs.dict(key = attrs.string(), value = attrs.string(), default = {}),
    },
)
