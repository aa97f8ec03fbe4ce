"""Transfers as users see them: run the models of a destination window by window, and sum up."""
