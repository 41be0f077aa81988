"""The decision log streamed (SPEC section 18): each tenant's receipts shipped, in chain order and at least once, to
the log sink connections granted to it (OTLP/HTTP logs or syslog RFC 5424 over TCP). A top-layer app: it reads the
receipts of `approvals.receipts`; nothing below imports it."""
