package registry

// Limiters returns the number of token buckets the Client keeps, for the tests that bound them.
func (c *Client) Limiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.limiters)
}
