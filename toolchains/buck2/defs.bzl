"""An execution platform for Buck2 that runs actions through lre.

`lre_platforms` returns one ExecutionPlatformInfo whose executor prefers
remote execution (lre on this machine) and falls back to local only for
actions that cannot run remotely. Point Buck2 at it with

    [build]
    execution_platforms = root//lre_platforms:lre

(`lre up` writes exactly this when the repository names no platform).
"""

def _lre_platforms_impl(ctx):
    properties = {
        "OSFamily": ctx.attrs.os_family,
        "cpu_count": str(ctx.attrs.cpu_count),
    }
    if ctx.attrs.memory_kb > 0:
        properties["memory_kb"] = str(ctx.attrs.memory_kb)
    if ctx.attrs.pool:
        properties["pool"] = ctx.attrs.pool
    properties.update(ctx.attrs.extra_properties)

    platform = ExecutionPlatformInfo(
        label = ctx.label.raw_target(),
        configuration = ConfigurationInfo(constraints = {}, values = {}),
        executor_config = CommandExecutorConfig(
            local_enabled = True,
            remote_enabled = True,
            # Run on the preferred executor only; racing local against remote
            # would do every action twice on the same laptop.
            use_limited_hybrid = True,
            remote_cache_enabled = True,
            remote_execution_properties = properties,
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
        # Keys lre matches on; see toolchains/bazel/BUILD.bazel for their meaning.
        "cpu_count": attrs.int(default = 1),
        "extra_properties": attrs.dict(key = attrs.string(), value = attrs.string(), default = {}),
        "memory_kb": attrs.int(default = 0),
        "os_family": attrs.string(default = "Linux"),
        "pool": attrs.string(default = ""),
    },
)
