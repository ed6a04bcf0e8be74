# frozen_string_literal: true

# The gem's hand-written declarations of the C ABI (lib/ratekeeper/native.rb) against
# include/ratekeeper.h, as read by a C parser (pycparser, in the venv of scripts/test-python:
# test/support/header_declarations.py): every attached function's parameters and return type,
# every struct's fields (names, types, order: hence offsets and size) and the status and failure
# policy codes. A signature changed in the header and not here fails this test, instead of
# passing wrong arguments or reading a struct at the wrong offsets.
#
# Needs what scripts/test-ruby provides: RK_PYTHON (a Python with pycparser).

require "json"
require "open3"
require_relative "test_helper"

class NativeHeaderTest < Minitest::Test
  Native = Ratekeeper::Native

  # The C struct each FFI struct of native.rb stands for.
  STRUCTS = {
    Native::Lease => "rk_lease",
    Native::SettleTicket => "rk_settle_ticket",
    Native::SettleSeal => "rk_settle_seal",
    Native::Decision => "rk_decision",
    Native::CheckAllPart => "rk_check_all_part",
    Native::WindowLimit => "rk_window_limit",
    Native::SlidingLimit => "rk_sliding_limit",
    Native::HttpLimit => "rk_http_limit",
    Native::HttpReport => "rk_http_report"
  }.freeze

  # C scalar types and the ruby-ffi type that passes each.
  SCALARS = {
    "void" => :void, "bool" => :bool, "double" => :double, "size_t" => :size_t,
    "uint8_t" => :uint8, "uint16_t" => :uint16, "uint32_t" => :uint32, "uint64_t" => :uint64,
    "int8_t" => :int8, "int16_t" => :int16, "int32_t" => :int32, "int64_t" => :int64
  }.freeze

  # The header's declarations (see test/support/header_declarations.py), read once.
  def self.header
    @header ||= begin
      python = ENV.fetch("RK_PYTHON") { raise "RK_PYTHON (a Python with pycparser) is required: run scripts/test-ruby" }
      script = File.join(__dir__, "support", "header_declarations.py")
      out, status = Open3.capture2(python, script, File.join(REPO_ROOT, "include", "ratekeeper.h"))
      raise "#{script} failed (#{status})" unless status.success?

      JSON.parse(out)
    end
  end

  def header = self.class.header

  # The ruby-ffi types that pass a C type correctly, as parameter or as return value.
  def accepted(c_type, role)
    return [SCALARS.fetch(c_type)] if SCALARS.key?(c_type)
    return %i[int int32] if c_type.start_with?("enum ")
    # A library-owned string is returned as :string; one the caller must free, or a buffer the
    # library writes, is a :pointer (a :string would copy it and lose the pointer).
    return role == :return ? [:string] : %i[string pointer] if c_type == "const char *"
    return [:pointer] unless c_type.end_with?("*")

    struct = c_type[/\A(?:const )?struct (\w+) \*\z/, 1]
    klass = STRUCTS.key(struct)
    klass ? [:pointer, klass.by_ref] : [:pointer]
  end

  # A declared ruby-ffi type as text.
  def spelled(ffi_type)
    klass = STRUCTS.keys.find { |k| k.by_ref.equal?(ffi_type) }
    klass ? "#{klass.name.split('::').last}.by_ref" : ffi_type.inspect
  end

  def test_every_attached_function_matches_the_header
    problems = Native::DECLARED.flat_map do |name, (params, ret)|
      c = header["functions"][name.to_s]
      next ["#{name}: not in include/ratekeeper.h"] unless c
      next ["#{name}: #{params.size} parameters, the header has #{c['params'].size}: #{c['params'].join(', ')}"] if params.size != c["params"].size

      wrong = params.zip(c["params"]).each_with_index.reject { |(ffi, ct), _| accepted(ct, :param).any? { |a| a.equal?(ffi) } }
      wrong.map { |(ffi, ct), i| "#{name}: parameter #{i} is #{spelled(ffi)}, the header's is `#{ct}` (#{accepted(ct, :param).map { |a| spelled(a) }.join(' or ')})" } +
        (accepted(c["return"], :return).include?(ret) ? [] : ["#{name}: returns #{ret.inspect}, the header's `#{c['return']}`"])
    end
    assert_empty problems, "native.rb's declarations differ from include/ratekeeper.h"
    assert_operator Native::DECLARED.size, :>=, 50, "the declarations were not recorded"
  end

  # A struct field as the C type it stands for (pointers are all one type to ruby-ffi).
  def field_type(field)
    type = field.type
    case type
    when FFI::StructByValue then "struct #{STRUCTS.fetch(type.struct_class)}"
    when FFI::ArrayType then "#{field_scalar(type.elem_type)}[#{type.length}]"
    else field_scalar(type)
    end
  end

  def field_scalar(type)
    return "pointer" if type.equal?(FFI::Type::POINTER)
    return "char" if type.equal?(FFI::Type::INT8)

    SCALARS.find { |_, ffi| FFI.find_type(ffi).equal?(type) }&.first || type.inspect
  end

  def test_every_struct_layout_matches_the_header
    declared = Native.constants.map { |c| Native.const_get(c) }.select { |c| c.is_a?(Class) && c < FFI::Struct }
    assert_equal declared.sort_by(&:name), STRUCTS.keys.sort_by(&:name), "a struct of native.rb is missing from STRUCTS"
    STRUCTS.each do |klass, c_name|
      c_fields = header["structs"].fetch(c_name) { flunk "#{c_name} is not in include/ratekeeper.h" }
      fields = klass.new.layout.fields.map { |f| [f.name.to_s, field_type(f)] }
      expected = c_fields.map { |name, type| [name, type.end_with?("*") ? "pointer" : type] }
      assert_equal expected, fields, "#{klass.name} (fields, in order) differs from `struct #{c_name}`"
    end
  end

  def test_status_and_failure_policy_codes_match_the_header
    statuses = header["enums"].fetch("rk_status").to_h { |name, value| [value, name.delete_prefix("RK_").downcase.to_sym] }
    assert_equal statuses, Native::STATUS
    policies = header["enums"].fetch("rk_failure_policy").to_h { |name, value| [name.delete_prefix("RK_").downcase.to_sym, value] }
    assert_equal policies, Native::FAILURE_POLICIES
    assert_equal [Native::OK, Native::OVER_LIMIT], [statuses.key(:ok), statuses.key(:over_limit)]
  end
end
