"""Decoding: caches, the engines that own them (step, prefill, state carry), generation and the
compiled model step."""
