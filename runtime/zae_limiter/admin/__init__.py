"""Administrative operations of `Repository`: one service per area, each built with what it needs
(the namespace's `Scope`; `changes.Changes`, the config-change protocol, for those that write)."""
