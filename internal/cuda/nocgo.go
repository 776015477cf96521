//go:build !cgo

package cuda

// Without cgo there is no way to load the driver; the helper says so.

const noCgo = "cryo was built without cgo (CGO_ENABLED=0) and cannot load the NVIDIA driver; rebuild it with CGO_ENABLED=1"

func probe(string) reply {
	return reply{Err: &wireError{Kind: kindLibrary, Message: noCgo}}
}

func checkpointCall(request) reply {
	return reply{Err: &wireError{Kind: kindLibrary, Message: noCgo}}
}

func inventory(string) reply {
	return reply{Err: &wireError{Kind: kindNVML, Message: noCgo}}
}
