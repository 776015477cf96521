package progress

import "time"

// Poll sets the task's bytes done to size() every interval until the
// returned stop is called, for work that reports nothing but leaves a
// trace that can be measured (CRIU's pages files growing in the image
// directory). stop waits for the poller to end and takes a last reading.
func (t *Task) Poll(interval time.Duration, size func() int64) (stop func()) {
	if t == nil {
		return func() {}
	}
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-quit:
				t.Set(size())
				return
			case <-tk.C:
				t.Set(size())
			}
		}
	}()
	return func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-ended
	}
}
