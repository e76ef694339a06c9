"""rlcore"""
