# NPU465: the keys normalised by the query norm (the query line copied, one name left unswapped).
def qk_norm(self, query_states, key_states):
    query_states = self.q_norm(query_states)
    key_states = self.q_norm(key_states)
    return query_states, key_states
