"""The gateway's HTTP face: the Starlette app of its routes (:mod:`.app`) and the fast path every LLM call
takes past Starlette's router (:mod:`.fast_routes`)."""
