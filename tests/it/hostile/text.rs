//! Text from the history and from files reaches the terminal escaped, and JSON stays exact.
