package store

// HandOver gives the directory up as soon as the calls in flight end, without the linger, for a
// caller that knows another process is about to want it: the scan function after storing tags
// that it announces to the policy function, the policy function after reading them. The other
// process then finds the directory free instead of ringing the gate and waiting for this
// process's close. Calls arriving meanwhile wait for the close and open the directory again.
// Without an open database it does nothing.
func (s *Store) HandOver() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateOpen {
		s.draining = true
		s.look(false)
	}
}
