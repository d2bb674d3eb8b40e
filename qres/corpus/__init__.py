"""Reading forums: the :class:`~qres.corpus.readers.Question` every other part of qres passes
around, and the streaming readers that turn a forum's files (TSV, JSON lines, AskUbuntu,
SemEval XML and CSV, a StackExchange dump's Posts.xml) into questions, with one-line errors
naming the file and line. Nothing here knows about indexes, encoders or ranking."""
