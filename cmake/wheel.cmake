# A Python wheel (scikit-build-core sets SKBUILD): the library and the volt8 command go inside the
# volt8 package, where the binding and the console script look for them (no absolute run path).
install(FILES $<TARGET_FILE:volt8> DESTINATION volt8 RENAME libvolt8.so.0)
install(PROGRAMS $<TARGET_FILE:volt8_cli> DESTINATION volt8/bin)
# cJSON linked in (VOLT8_STATIC_DEPS): its copyright and licence texts travel with it.
if(VOLT8_STATIC_DEPS)
  install(DIRECTORY "${VOLT8_STATIC_DEPS}/licenses/" DESTINATION volt8/licenses)
endif()
