# SPDX-License-Identifier: Apache-2.0
# Dependencies of the io area (src/io), as the INTERFACE target grpo_io_deps:
#   yaml-cpp  YAML (and JSON) run configs with inheritance and overrides (src/io/layered_config.cpp)
#             Debian: libyaml-cpp-dev (MIT)
# It does not appear in a public header: include/grpo/io/layered_config.hpp has its own tree type.
include_guard(GLOBAL)
find_package(yaml-cpp REQUIRED)

add_library(grpo_io_deps INTERFACE)
# yaml-cpp 0.7 (Debian 12) defines the target `yaml-cpp`; 0.8 adds the namespaced alias `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(grpo_io_deps INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(grpo_io_deps INTERFACE yaml-cpp)
endif()

# The installed package re-creates the imported target grpo_io_deps links (static grpo needs it to link).
string(APPEND GRPO_CONFIG_EXTRA_DEPENDENCIES "find_dependency(yaml-cpp)\n")
