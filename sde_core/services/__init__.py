"""UI-free services the dashboard pages and the command line call (workspace building, uploads).

Layer 5: may use the pipeline and everything below it; never imports Streamlit.
"""
