package runner

// Alive counts the pool's warm interpreters that are ready to fork jobs
// (for the codexec_zygotes_alive metric).
func (p *Pool) Alive() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		if e.state == stateReady && e.z != nil {
			n++
		}
	}
	return n
}
