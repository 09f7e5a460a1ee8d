class DelaySystem: pass
