"""The knowledge pack: the bundled one (rules/ in the repository) and a team's, laid out alike.

    layout.py    where each part of a pack lives: rules by category, facts/, vocabulary/, capture/presets/
"""
