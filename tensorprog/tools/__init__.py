"""Tools built on both back ends: dataset kernels (:mod:`.kernel`), finite width against the limit
(:mod:`.converge`, :mod:`.plot`) and Golikov's tail bound (:mod:`.tailbound`)."""
