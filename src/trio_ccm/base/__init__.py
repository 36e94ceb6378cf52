"""The floor of trio-ccm: domain-free primitives that import nothing else of trio_ccm
(an import-linter contract holds it).

- `mailbox`: the coalescing per-key mailbox, the one hand-off between tasks.
- `observable`: a value tasks can wait on (`AsyncValue`).
- `pacing`: `Paced`, a checkpoint every N items of a long loop.
- `values`: values both the kube cache and the provider interface hold (`NodeAddress`).
- `govalues`: Go's duration and bool syntax, as the Go CCM reads and writes them.
"""
