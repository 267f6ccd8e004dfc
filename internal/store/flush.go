package store

// flushSoon writes what the committed transactions left in the mapped value-log file to disk, in
// the background. Badger writes a value log through a memory map and flushes it only when the
// file is full and it starts the next one: the write that fills a 16 MiB file waited for the
// whole file to reach the disk, 79-91 ms in BenchmarkPushStep10k, once every hundred pushes to
// a list of 10,000 tags (docs/store.md, "Flushing"). Flushed after each write instead, off the
// caller's path, the file holds at most the writes since the last flush when it fills.
//
// A flush counts as a call in flight, so the database does not close under it; it runs only
// while the database is open and admits calls, and one at a time: writes that commit during a
// flush are flushed by one more round.
func (s *Store) flushSoon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flushing {
		s.flushAgain = true
		return
	}
	if s.state != stateOpen || s.draining || s.closed {
		return
	}
	s.flushing = true
	s.users++
	db := s.db
	go func() {
		for {
			if err := db.Sync(); err != nil {
				s.opts.logger.Warn("flushing the tag store", "dir", s.dir, "error", err)
			}
			s.mu.Lock()
			again := s.flushAgain && !s.draining && !s.closed
			s.flushAgain = false
			if !again {
				s.flushing = false
				s.mu.Unlock()
				s.release()
				return
			}
			s.mu.Unlock()
		}
	}()
}
