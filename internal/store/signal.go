package store

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// CloseOnSignal closes s when the process receives SIGTERM or SIGINT: calls in flight finish, later calls fail
// with ErrClosed, and the database is closed cleanly. It then delivers the
// signal again, so a function server that does not handle it exits as it
// would have. stop undoes CloseOnSignal.
//
// A server that shuts down gracefully by itself should instead call Close
// after its last request.
func CloseOnSignal(s *Store) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	quit := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			if err := s.Close(); err != nil {
				s.opts.logger.Warn("closing the tag store on signal", "dir", s.dir, "signal", sig.String(), "error", err)
			}
			signal.Stop(ch)
			if sys, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), sys)
			}
		case <-quit:
			signal.Stop(ch)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit) }) }
}
