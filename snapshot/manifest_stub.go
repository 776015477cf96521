package snapshot

// TEMPORARY stub; the snapshot owner replaces this file.

// ManifestName is the GPU manifest's file name inside a CRIU image directory.
const ManifestName = "cryo-manifest.json"

// Manifest is the GPU manifest of one checkpoint.
type Manifest struct {
	Version int `json:"version"`
}
