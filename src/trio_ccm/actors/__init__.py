"""Controllers as actors: one child task per object key, fed by a coalescing mailbox.

`keyed` runs the per-key children (spawned on demand, serialised per key, capped across
keys by a `trio.CapacityLimiter`, retried with `backoff`, drained on shutdown); `backoff`
holds the per-key retry delays and the upstream presets. The controller modules
(`service_lb`, `cloud_node`, ...) supply the per-object handler.
"""
