"""The Kubernetes side: connection config, client, informers, patches, Events."""
