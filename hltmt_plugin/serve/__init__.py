"""``hltmt-serve``: one loaded model serving every direction over HTTP (docs/serving.md).

- :mod:`~hltmt_plugin.serve.batcher`: the requests' sentences queued and merged into one
  ``translate_batch`` call of the contract (:class:`~hltmt_plugin.hub.contract.Translator`), each
  result back to its request; the queue bounded;
- :mod:`~hltmt_plugin.serve.api`: what a request holds (LibreTranslate's ``/translate``, the native
  ``/v1/translate``) read and checked in one line, what an answer holds, the model's languages and
  the OpenAPI document;
- :mod:`~hltmt_plugin.serve.metrics`: the counters, gauges and histograms of ``/metrics``
  (Prometheus' text format);
- :mod:`~hltmt_plugin.serve.page`: the page at ``/`` and the API's page at ``/docs``;
- :mod:`~hltmt_plugin.serve.app`: the ASGI application (Starlette) and its server (uvicorn), both
  imported only inside the functions that need them (the ``serve`` extra).

Nothing here translates: every sentence goes through the translator's ``translate_batch``.
"""
