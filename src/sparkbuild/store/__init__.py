"""The store: where bytes are kept, beneath every stage.

The content-addressed dependency cache and its file lock (:mod:`.cache`, :mod:`.lock`),
downloads hashed on the way in (:mod:`.download`), atomic writes and the leftovers of
killed runs (:mod:`.files`), and sha256 (:mod:`.hashing`).  It hands the stages verified
paths and nothing else: it knows no recipe, no tree and no build.
"""
