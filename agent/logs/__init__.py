"""Log sources (files, the kernel log, the journal) and the multi-line grouper they share."""
