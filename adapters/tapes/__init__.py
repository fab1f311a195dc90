"""Tapes: recorded streams of watch events, and replaying them through the controller's
own decision code (DESIGN §7). One module per concern: `times` (RFC 3339), `lines`
(the tape line at the edge), `reader` (streaming), `writer`, `recording` (from a live
API server), `replaying` (virtual clock, no server) and `report`."""
