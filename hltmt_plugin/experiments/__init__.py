"""The experiment drivers, installed with the package: ``hltmt-main-job`` (train, decode and score
the systems on one data set, end to end), ``hltmt-study`` (the quality study: several systems and
seeds on a selection of the data) and ``hltmt-report`` (the tables, charts and gate heatmap of a
run). Like the user's commands in :mod:`hltmt_plugin.cli`, each module is one command, a
``main(argv)`` that imports neither torch nor fairseq before its arguments are read; what the
drivers and the experiment scripts share is :mod:`hltmt_plugin.experiments.steps`. The drivers run
the user's commands (``hltmt-prepare-data``) and use their helpers (decoding, whole-file output);
no user's command uses a driver."""
