"""The client's transport: one layer for every request that does not go through httpx.

httpx costs about half a millisecond of Python per request, as much as the server's work for a
small write, so the adapters' hot paths (`StepwiseSession`'s items calls, `StepwiseSaver`'s get
and put) and the worker's claim long poll talk HTTP/1.1 over plain keep-alive connections:

* `endpoint`: where requests go (``http(s)://`` URLs, ``unix:PATH`` sockets), and when a
  client's calls may go direct (`DirectTarget`);
* `retry`: when to try again and how long to wait first (`RetryPolicy`, the one policy of the
  clients, the lean connections and the worker);
* `wire`: the bytes of a request, the reading of an answer, and `request_flow`, the retries of
  one request, without I/O;
* `sync`: blocking connections (`FastHTTP`, a pool for the sync saver; `ClaimConnection` for the
  worker's claims);
* `aio`: asyncio connections (`ItemsConnection`, `LeanPool`).
"""
