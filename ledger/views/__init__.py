"""Evidence for people: payload values by digest prefix, value diffs, the HTML report."""
