package cuda

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrBadUUID: a GPU UUID is not of the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
var ErrBadUUID = errors.New("invalid GPU UUID")

// ParseUUID parses "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the form NVML
// and nvidia-smi print) into the driver's 16-byte CUuuid. The "GPU-" prefix
// is optional.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	h := strings.TrimPrefix(s, "GPU-")
	groups := strings.Split(h, "-")
	if len(groups) != 5 || len(groups[0]) != 8 || len(groups[1]) != 4 ||
		len(groups[2]) != 4 || len(groups[3]) != 4 || len(groups[4]) != 12 {
		return u, fmt.Errorf("%w %q: want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (as nvidia-smi -L prints it)", ErrBadUUID, s)
	}
	b, err := hex.DecodeString(strings.Join(groups, ""))
	if err != nil {
		return u, fmt.Errorf("%w %q: %v", ErrBadUUID, s, err)
	}
	copy(u[:], b)
	return u, nil
}

// FormatCUDAVersion turns cuDriverGetVersion's 13000 into "13.0".
func FormatCUDAVersion(v int) string {
	if v <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// pairBytes lays the pairs out as CUcheckpointGpuPair: old then new UUID.
func pairBytes(pairs []GPUPair) ([]byte, error) {
	raw := make([]byte, 0, 32*len(pairs))
	for _, p := range pairs {
		o, err := ParseUUID(p.Old)
		if err != nil {
			return nil, err
		}
		n, err := ParseUUID(p.New)
		if err != nil {
			return nil, err
		}
		raw = append(append(raw, o[:]...), n[:]...)
	}
	return raw, nil
}
