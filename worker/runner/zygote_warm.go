package runner

// WarmCount counts the pool's warm interpreters: zygotes started and ready
// to fork jobs (not those starting, failed or refused as unsafe). A worker
// advertises it in its presence record, for `codexec status`.
func (p *Pool) WarmCount() int {
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
