"""UI-free functions the dashboard pages (and the CLI) call: the business logic of a view.

Pages keep widgets and layout only; what a page needs to know or compute lives here (it may
use the pipeline, the inputs and :mod:`sde_core.viz`, never Streamlit).
"""
