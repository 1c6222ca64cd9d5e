"""The command line's parser and dispatch, and the local web page whose answers are the command line's own."""
