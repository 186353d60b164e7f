"""The path of one LLM call through the gateway, apart from HTTP: the request checked with OpenAI's rules
(:mod:`.validate`), routed to its role's policy (:mod:`.routing`), the answer shaped for the client
(:mod:`.for_client`), gathered as an LLM span (:mod:`.record`) and written to the store once the answer
is out (:mod:`.recorder`), with token ids made from the text where the upstream gave none
(:mod:`.retokenize`)."""
