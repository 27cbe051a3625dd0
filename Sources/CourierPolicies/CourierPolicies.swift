// CourierPolicies: the decisions of the session layer as pure values — the task state machine,
// redirect rules, content decoding — fed facts and returning decisions, with no sockets, no
// Dispatch and no clock. See docs/internals/session.md.
