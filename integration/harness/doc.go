// Package harness is what cryo's integration tests share: it starts real
// containerd, runc, CRIU, Podman, registries and kubelets in temporary
// directories, builds and finds cryo's binaries, points cryo at the fake
// GPU driver, and waits for and runs things. Only the packages beside it,
// one per front end, import it; they run one at a time (go test -p 1)
// because they share the host's containerd paths, cgroups and root.
//
// The tests need root and the parts that `make deps` installs, and the
// binaries that `make build failpoints fake` writes to bin/ (or $CRYO_BIN).
package harness
