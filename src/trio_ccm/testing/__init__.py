"""Public test tooling: the Kubernetes API emulator (and, later, the simulated cloud).

Runtime modules never import this package.
"""
