//go:build tools

// Package k8sbuild names the Kubernetes commands that build-k8s.sh builds
// for the integration tests' one-node cluster, so that `go mod tidy` keeps
// every module they need in go.mod and go.sum. Its own module: cryo's go.mod
// never sees Kubernetes.
package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
