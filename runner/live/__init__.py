"""The live view of a run: its state (board), the table drawn from it (render), output lines
with `\\r` redraws (lines), reasons in words (words) and the report on screen at the end (final).
`runner.engine.console.Console` feeds and draws them."""
