"""The base layer: what every other layer uses (the console, TensorFlow's CPU settings, progress
lines, the JSON files a run writes and their names); it imports no other layer but errors.py."""
