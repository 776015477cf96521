package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Digesting a ~1 GiB pages image (the size a 1 GiB GPU workload leaves),
// in the page cache as right after a dump. CRYO_DIGEST_BENCH_MIB sets the
// size. Compare SingleStream (one sha256 over the file, as format version 1
// did) with Files and Verify (chunked, in parallel):
//
//	go test -run '^$' -bench . -benchtime 5x ./internal/manifest/digest/
//
// Measured on 1 GiB, in the page cache (seconds per op, ranges over runs on
// a busy machine; Files and Verify include listing, stat and open):
//
//	                          SingleStream  Files    Verify
//	2 cores  (Xeon, SHA-NI)   0.93-1.23     0.50-0.83  0.55-0.73
//	16 cores (Xeon, SHA-NI)   1.17          0.085      0.097
//
// Chunks of 4 and 16 MiB were alike on 16 cores (0.080 and 0.084 s), 64 MiB
// slower (0.100 s: 16 chunks on 16 cores leave the tail unbalanced); read
// buffers of 512 KiB and 1 MiB were alike, 4 MiB slower (0.110 s).

func benchImageDir(b *testing.B) (string, int64) {
	b.Helper()
	mib := 1024
	if s := os.Getenv("CRYO_DIGEST_BENCH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "pages-1.img"))
	if err != nil {
		b.Fatal(err)
	}
	block := randBytes(1<<20, 7)
	for i := 0; i < mib; i++ {
		block[0] = byte(i) // no two blocks alike
		if _, err := f.Write(block); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"inventory.img", "core-1.img", "mm-1.img", "pagemap-1.img"} {
		os.WriteFile(filepath.Join(dir, name), randBytes(4096, 8), 0o644)
	}
	return dir, int64(mib) << 20
}

// singleStreamSHA256 is the digest of format version 1: one sha256 stream.
func singleStreamSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func BenchmarkSingleStream(b *testing.B) {
	dir, size := benchImageDir(b)
	files, _ := digestedFiles(dir)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, f := range files {
			if _, err := singleStreamSHA256(filepath.Join(dir, f)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkFiles(b *testing.B) {
	dir, size := benchImageDir(b)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Files(dir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	dir, size := benchImageDir(b)
	d, err := Files(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := Verify(dir, d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChunkSize hashes with other chunk sizes, to weigh the
// balance of the cores against the per-chunk cost.
func BenchmarkChunkSize(b *testing.B) {
	dir, size := benchImageDir(b)
	for _, mib := range []int64{4, 16, 64} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				f := &hashFile{path: filepath.Join(dir, "pages-1.img"), size: size, chunk: mib << 20}
				hashAll([]*hashFile{f}, nil)
				if f.err != nil {
					b.Fatal(f.err)
				}
			}
		})
	}
}

// BenchmarkReadBuffer hashes with other read buffer sizes.
func BenchmarkReadBuffer(b *testing.B) {
	dir, size := benchImageDir(b)
	defer func(n int) { readBufSize = n }(readBufSize)
	for _, kib := range []int{128, 512, 1024, 4096} {
		b.Run(fmt.Sprintf("%dKiB", kib), func(b *testing.B) {
			readBufSize = kib << 10
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				if _, err := Files(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
