"""Generated kubelet pod-resources v1 stubs (see api.proto and generate.sh)."""
