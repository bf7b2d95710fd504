"""Pure routing decisions: which route a model takes, which endpoint serves it. `now` is passed in."""
