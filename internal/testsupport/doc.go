// Package testsupport holds what the tests of several packages share: the
// fake CUDA driver of a test binary (FakeDriver), a buffer that a writer and
// the test can use at once (Buffer), a free loopback address (FreeAddr,
// FreePort), a registry server on loopback (StartRegistry) and a copy of a
// fixture directory (CopyFiles).
//
// It is a normal package so that the tests of any package, and the
// integration tests, can import it; only _test.go files do.
package testsupport
