package progress

import (
	"bytes"
	"io"
	"sync"
)

// Writer returns a writer whose lines are printed above the running tasks,
// for a logger (cryo's warnings) that writes while a line is drawn: written
// straight to the terminal, a warning would land in the middle of that
// line. A nil (quiet) renderer returns fallback.
func (r *Renderer) Writer(fallback io.Writer) io.Writer {
	if r == nil {
		return fallback
	}
	return &lineWriter{r: r}
}

type lineWriter struct {
	r   *Renderer
	mu  sync.Mutex
	buf []byte // an unfinished line
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.r.Println(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
