from moetools.cli import main

main()
