package admission

import (
	"sort"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
)

// setEntries sets keys of the string map at path (annotations, labels):
// one add of the whole map when it does not exist yet, else one add per
// key, which replaces a value that is there.
func setEntries(exists bool, path string, kv map[string]string) []jsonpatch.JsonPatchOperation {
	if !exists {
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", path, kv)}
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ops []jsonpatch.JsonPatchOperation
	for _, k := range keys {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escape(k), kv[k]))
	}
	return ops
}

// escape writes a map key as one JSON pointer token (RFC 6901).
func escape(k string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(k) }
