"""Foreign APIs served through the gateway's one chat call: OpenAI's Responses API (:mod:`.responses`) and
Anthropic's Messages API (:mod:`.anthropic`), each translated into a chat request and its answer back, so
every route records the same exact LLM span."""
