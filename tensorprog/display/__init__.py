"""Rich displays: the HTML/LaTeX pieces every stage's displays share (:mod:`.html`)."""
