package store

// handOver gives the directory up as soon as the calls in flight end, without the linger (see
// HandOverListings). Calls arriving meanwhile wait for the close and open the directory again.
// Without an open database it does nothing.
func (s *Store) handOver() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateOpen {
		s.draining = true
		s.look(false)
	}
}
