"""trio-ccm-testbed: the test world of trio-ccm, a distribution of its own.

- `trio_ccm_testbed.apiserver`: the Kubernetes API emulator (`ApiServer`), in-process or
  served over HTTP(S) for kubectl.
- `trio_ccm_testbed.cloud`: the simulated cloud (`SimCloud`) behind the `sim` provider.
- `trio_ccm_testbed.aws`: the moto world behind the `aws` provider's tests and testbed.
- `trio_ccm_testbed.testbed`: the emulator, a cloud and N simulated kubelets together.
- `trio_ccm_testbed.chaos`: seeded fault schedules with the referee watching.
- `trio_ccm_testbed.cli`: `trio-ccm apiserver|testbed|demo`, registered through the
  `trio_ccm.commands` entry point group.

The runtime (`trio_ccm`) never imports this package; the public kit for provider authors
(`trio_ccm.testing`) imports it when it is installed (`pip install 'trio-ccm[testing]'`).
"""
