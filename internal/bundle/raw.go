package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Raw is a spec read as generic JSON, numbers kept verbatim, so that the
// fields cryo does not know survive a rewrite unchanged (a runtime may add
// its own; a typed round trip would drop them).
type Raw map[string]any

// ReadRaw reads the spec of the bundle in dir for a rewrite.
func ReadRaw(dir string) (Raw, error) {
	data, err := os.ReadFile(Path(dir))
	if err != nil {
		return nil, fmt.Errorf("read bundle config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var spec Raw
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("parse %s/config.json: %w", dir, err)
	}
	return spec, nil
}

// Write replaces the bundle's config.json atomically.
func (r Raw) Write(dir string) error {
	data, err := json.Marshal(map[string]any(r))
	if err != nil {
		return err
	}
	p := Path(dir)
	tmp := p + ".cryo-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write bundle config: %w", err)
	}
	return os.Rename(tmp, p)
}

// Annotation returns the value of key and whether the spec has it at all:
// runc reads an empty value of some annotations as "none".
func (r Raw) Annotation(key string) (string, bool) {
	a, _ := r["annotations"].(map[string]any)
	v, ok := a[key].(string)
	return v, ok
}

// SetAnnotation sets key, adding the annotations if the spec has none.
func (r Raw) SetAnnotation(key, value string) {
	a, _ := r["annotations"].(map[string]any)
	if a == nil {
		a = map[string]any{}
		r["annotations"] = a
	}
	a[key] = value
}
