"""UI-free functions the dashboard pages and the command line call: the business logic of a view
(workspace building and uploads, evaluation views, plan results, audit reports).

Pages keep widgets and layout only; what a page needs to know or compute lives here. Layer 5:
may use the pipeline, the inputs and :mod:`sde_core.viz`, never Streamlit.
"""
